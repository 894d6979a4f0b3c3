"""Generated clients of repo_read."""
