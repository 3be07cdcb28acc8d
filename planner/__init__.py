"""The planner: Python API and CLI over costmodel and search."""
