"""Generated clients of patch_proposal."""
