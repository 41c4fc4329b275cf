"""Pure parsers: raw node data in, typed facts out. No I/O here."""
