"""Reports rendered from record files: the comparison (runs), the device experiments
and the device scopes; terminal tables, Markdown and plots."""
