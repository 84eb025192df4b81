"""The ten tabletop tasks (filled in with the scene's props)."""
