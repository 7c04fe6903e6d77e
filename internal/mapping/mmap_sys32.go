//go:build linux && (386 || arm)

package mapping

import "golang.org/x/sys/unix"

// sysMmap is mmap2 on 32-bit kernels: their plain mmap (old_mmap) takes a
// pointer to an argument block, not the arguments, and refuses ours with
// EINVAL. mmap2's offset is in pages; every call here passes 0.
const sysMmap = unix.SYS_MMAP2
