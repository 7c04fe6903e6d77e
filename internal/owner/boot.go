package owner

import (
	"bytes"
	"encoding/hex"
	"os"
	"sync/atomic"
)

var bootOverride atomic.Pointer[[16]byte]

// BootID returns this boot's id from /proc/sys/kernel/random/boot_id (or
// the value set by SetBootIDForTest) and true, or false when it cannot be
// read (no /proc): then nobody can tell whether the machine rebooted.
func BootID() ([16]byte, bool) {
	if p := bootOverride.Load(); p != nil {
		return *p, true
	}
	var id [16]byte
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id, false
	}
	h := bytes.ReplaceAll(bytes.TrimSpace(b), []byte("-"), nil)
	if n, err := hex.Decode(id[:], h); err != nil || n != len(id) {
		return id, false
	}
	return id, true
}

// SetBootIDForTest makes BootID return id (nil restores the real one). For
// tests that simulate a reboot.
func SetBootIDForTest(id *[16]byte) { bootOverride.Store(id) }
