"""The server process's own machinery: the start-up warm-up, compressed static files, the measurement
worker, the memory allocator, the interpreter's switch interval and recycling an idle server.
"""
