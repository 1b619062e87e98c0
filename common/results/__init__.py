"""The run record: its schema and file name, atomic files, reading a results folder."""
