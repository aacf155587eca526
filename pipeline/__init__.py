"""Orchestration: DVC stage entry points, the task store, Dask fan-out, host monitor."""
