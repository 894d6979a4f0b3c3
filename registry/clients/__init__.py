"""Generated typed clients (dome registry gen-client). Do not edit; `dome registry check` fails on drift."""
