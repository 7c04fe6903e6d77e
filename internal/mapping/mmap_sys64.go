//go:build linux && !(386 || arm)

package mapping

import "golang.org/x/sys/unix"

// sysMmap is mmap, which takes its six arguments in registers here.
const sysMmap = unix.SYS_MMAP
