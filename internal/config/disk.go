package config

// validateDiskLimits checks worker.min_free_disk and worker.max_file_size.
func validateDiskLimits(w WorkerConfig, bad func(path, format string, args ...any)) {
	if w.MinFreeDisk < 0 {
		bad("worker.min_free_disk", "must not be negative (0 turns the disk guard off; default 1GiB)")
	}
	if w.MaxFileSize < 0 {
		bad("worker.max_file_size", "must not be negative (0 means no limit)")
	}
}
