"""Pure numpy/scipy kernels on in-memory blocks. No dask, no prefect, no files."""
