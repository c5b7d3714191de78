"""The ground floor: the episode protocol, errors, paths, validation, atomic files."""
