"""Thin command wrappers: parse, call a package function, print."""
