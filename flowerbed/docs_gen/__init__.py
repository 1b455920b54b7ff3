"""The documentation's generated pieces: the reference pages, the tables, the table of contents
and the package's layout, made from the declarations and the source, never typed by hand."""
