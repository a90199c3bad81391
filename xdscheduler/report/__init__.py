"""Reports people read: tables, plots and a page."""
