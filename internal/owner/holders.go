package owner

import (
	"os"
	"strconv"
	"strings"

	"github.com/shmarena/shmarena/internal/layout"
	"github.com/shmarena/shmarena/internal/mem"
	"golang.org/x/sys/unix"
)

// procDir is where processes are listed; a variable so a test can move it.
var procDir = "/proc/"

// Holders returns the pids, in this process's view of /proc, of the
// processes that hold the description holding entry i's lock: the pid that
// registered (the hint) when it still does, else every process found
// holding it by a scan of /proc/*/fdinfo (more than one after a fork
// without exec). It returns nil when it cannot tell: no /proc, hidepid, a
// holder in a PID namespace this one cannot see, or the entry not held.
//
// An OFD lock records no pid (F_OFD_GETLK and /proc/locks say -1); the
// fdinfo of every descriptor of a description lists its locks, which is
// what is read here. It costs a scan of the hint's descriptors, and of
// every process's when the hint does not hold the lock: for display only.
func (h *Handle) Holders(i int) []int {
	if i < 0 || i >= Entries {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(h.fd, &st) != nil {
		return nil
	}
	off := layout.ProcSlotOff(i)
	w := mem.Load64(h.b, off+eGen)
	if w>>candBits == 0 {
		return nil
	}
	f := lockLine{dev: uint64(st.Dev), ino: st.Ino, off: lockOff(i, w&candMask)}
	if hint := int(mem.Load32(h.b, off+ePid)); hint > 0 && f.heldBy(hint) {
		return []int{hint}
	}
	d, err := os.Open(procDir)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var pids []int
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && f.heldBy(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// lockLine finds a lock on byte off of file dev:ino in fdinfo.
type lockLine struct {
	dev, ino uint64
	off      int64
}

// heldBy reports whether one of pid's descriptors of the file holds the
// lock: its fdinfo lists it.
func (f lockLine) heldBy(pid int) bool {
	dir := procDir + strconv.Itoa(pid)
	d, err := os.Open(dir + "/fd")
	if err != nil {
		return false
	}
	fds, _ := d.Readdirnames(-1)
	d.Close()
	// " <ino> <start> <end>", the end of a line of /proc/locks' format.
	want := " " + strconv.FormatInt(f.off, 10) + " " + strconv.FormatInt(f.off, 10)
	ino := ":" + strconv.FormatUint(f.ino, 10) + want
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Stat(dir+"/fd/"+fd, &st) != nil || uint64(st.Dev) != f.dev || st.Ino != f.ino {
			continue
		}
		b, err := os.ReadFile(dir + "/fdinfo/" + fd)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "lock:") && strings.Contains(line, "OFDLCK") &&
				strings.Contains(line, " WRITE ") && strings.HasSuffix(line, ino) {
				return true
			}
		}
	}
	return false
}
