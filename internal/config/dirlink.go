package config

// Values of worker.link_input_directories.
const (
	// LinkInputDirectoriesAuto binds big input directories of sandboxed
	// actions read-only from the worker's tree cache.
	LinkInputDirectoriesAuto = "auto"
	// LinkInputDirectoriesOff lays out every exec root file by file.
	LinkInputDirectoriesOff = "off"
)

// validateLinkInputDirectories checks worker.link_input_directories.
func validateLinkInputDirectories(w WorkerConfig, bad func(path, format string, args ...any)) {
	switch w.LinkInputDirectories {
	case LinkInputDirectoriesAuto, LinkInputDirectoriesOff:
	case "symlink":
		bad("worker.link_input_directories", "symlink is not supported: a symlinked directory changes what \"..\" and realpath mean inside the action and exposes the cache to it; use auto (read-only binds in the sandbox) or off")
	default:
		bad("worker.link_input_directories", "%q is not a mode; use auto (bind big input directories read-only into sandboxed actions) or off (file by file)", w.LinkInputDirectories)
	}
}
