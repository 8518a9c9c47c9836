"""``dxplain serve``: a read-only web app and JSON API over an output folder's published runs (``web.app``)."""
