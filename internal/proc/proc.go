// Package proc identifies processes across the processes sharing an arena:
// a 64-bit owner token made of the pid and the process start time, and a
// liveness test that sees through pid reuse.
package proc

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// A Token names one process instance: pid<<42 | start time (clock ticks
// since boot, low 42 bits). It is never 0, so 0 can mean "no owner".
type Token uint64

const startBits = 42

// Pid returns the process id the token names.
func (t Token) Pid() int { return int(uint64(t) >> startBits) }

// Start returns the start-time part of the token.
func (t Token) Start() uint64 { return uint64(t) & (1<<startBits - 1) }

// Make builds a token from a pid and start time.
func Make(pid int, start uint64) Token {
	return Token(uint64(pid)<<startBits | start&(1<<startBits-1))
}

var self struct {
	once sync.Once
	tok  Token
}

// Self returns this process's token. Owner identity is per process, never
// per thread: goroutines move between threads.
func Self() Token {
	self.once.Do(func() {
		pid := os.Getpid()
		st, _, err := stat(pid)
		if err != nil {
			st = 0
		}
		self.tok = Make(pid, st)
	})
	return self.tok
}

// ErrNoProcess reports a pid that does not exist.
var ErrNoProcess = errors.New("no such process")

// stat reads /proc/<pid>/stat and returns the start time and state byte.
func stat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, 0, ErrNoProcess
		}
		return 0, 0, err
	}
	// comm (field 2) may hold spaces and parentheses: fields resume after
	// the last ')'. Field 3 is the state, field 22 the start time.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("proc: malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("proc: malformed stat")
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, 0, errors.New("proc: malformed stat")
	}
	return start, f[0][0], nil
}

// Alive reports whether the process a token names is still running: the
// pid exists, is not a zombie, and started at the recorded time (else the
// pid was reused). The calling process is always alive. A token with pid 0
// is dead. An unexpected error reading /proc counts as alive, so a lock is
// never taken from a process that may be running.
func Alive(t Token) bool {
	if t == Self() {
		return true
	}
	pid := t.Pid()
	if pid <= 0 {
		return false
	}
	start, state, err := stat(pid)
	if errors.Is(err, ErrNoProcess) {
		return false
	}
	if err != nil {
		return true
	}
	if state == 'Z' || state == 'X' {
		return false
	}
	return start&(1<<startBits-1) == t.Start()
}

var bootOverride atomic.Pointer[[16]byte]

// BootID returns this boot's id from /proc/sys/kernel/random/boot_id, or
// the value set by SetBootIDForTest.
func BootID() [16]byte {
	if p := bootOverride.Load(); p != nil {
		return *p
	}
	var id [16]byte
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	h := bytes.ReplaceAll(bytes.TrimSpace(b), []byte("-"), nil)
	_, _ = hex.Decode(id[:], h)
	return id
}

// SetBootIDForTest makes BootID return id (nil restores the real one). For
// tests that simulate a reboot.
func SetBootIDForTest(id *[16]byte) { bootOverride.Store(id) }

// Of returns the token of a running process, or ErrNoProcess.
func Of(pid int) (Token, error) {
	st, _, err := stat(pid)
	if err != nil {
		return 0, err
	}
	return Make(pid, st), nil
}
