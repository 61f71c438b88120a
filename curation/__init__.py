"""curation."""
