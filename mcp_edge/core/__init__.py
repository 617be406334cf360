"""Sans-I/O rules of the gateway: pure functions over dicts and bytes, no sockets, no clocks."""
