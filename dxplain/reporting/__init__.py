"""The HTML report (``dxplain report``): one self-contained page for a refresh run or a result folder.

``aggregate`` turns a run's rows (record batches, read by ``io``) and manifest into the numbers the page
shows; ``html`` holds the page's building blocks (tables, bars, inline SVG figures); ``pages`` assembles
the two pages. Every function here returns values or strings: ``io.report`` reads the folders and writes
the page.
"""
