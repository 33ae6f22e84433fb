//go:build !linux

package blobstore

import "os"

const directIOAlign = 4096

// openDirect reports that O_DIRECT is not used on this system.
func openDirect(string) (*os.File, bool, error) { return nil, false, nil }

func clearDirect(*os.File) error { return nil }
