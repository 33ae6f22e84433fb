package testutil

import (
	"debug/elf"
	"errors"
	"os"
	"testing"
)

// BusyboxPath is where Debian's busybox-static installs a statically
// linked busybox: one file that runs in an input root without shared
// libraries, the sysroot of the chroot mode's tests.
const BusyboxPath = "/bin/busybox"

// StaticBusybox returns the contents of BusyboxPath. When it is missing
// or dynamically linked the test is skipped on a developer machine and
// fails under CI=true (scripts/install-test-deps.sh installs it).
func StaticBusybox(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(BusyboxPath)
	if err == nil {
		err = checkStatic(BusyboxPath)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a static %s is required under CI=true (apt-get install busybox-static): %v", BusyboxPath, err)
		}
		t.Skipf("no static %s (apt-get install busybox-static): %v", BusyboxPath, err)
	}
	return b
}

// checkStatic says why p is not a statically linked executable: one
// with no program interpreter.
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("it is dynamically linked")
		}
	}
	return nil
}
