"""End-to-end tests of the gpudock command line."""
