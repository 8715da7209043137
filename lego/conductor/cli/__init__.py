"""The `lego` command line."""
