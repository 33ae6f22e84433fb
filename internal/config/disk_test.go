package config

import (
	"strings"
	"testing"
)

func TestDiskLimitKeys(t *testing.T) {
	cfg := Default()
	if cfg.Worker.MinFreeDisk != 1<<30 || cfg.Worker.MaxFileSize != 0 {
		t.Errorf("defaults: min_free_disk %d, max_file_size %d; want 1GiB and 0 (off)", cfg.Worker.MinFreeDisk, cfg.Worker.MaxFileSize)
	}
	if err := Parse([]byte("worker:\n  min_free_disk: 5GiB\n  max_file_size: 2GiB\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Worker.MinFreeDisk != 5<<30 || cfg.Worker.MaxFileSize != 2<<30 {
		t.Errorf("parsed min_free_disk %d, max_file_size %d", cfg.Worker.MinFreeDisk, cfg.Worker.MaxFileSize)
	}
	for _, key := range []string{"min_free_disk", "max_file_size"} {
		cfg := Default()
		err := Parse([]byte("worker:\n  "+key+": -1\n"), &cfg)
		if err == nil || !strings.Contains(err.Error(), "worker."+key) || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s: -1: error %v, want one naming the key and saying it must not be negative", key, err)
		}
	}
}
