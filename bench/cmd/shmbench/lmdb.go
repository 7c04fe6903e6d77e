//go:build lmdb

package main

// LMDB peer: a minimal cgo binding over Debian's liblmdb-dev, written here
// because no maintained Go binding is served by this machine's module
// proxy. Each operation is one cgo call doing what a binding's View or
// Update does: a read renews a reset read-only transaction (LMDB's
// recommended fast path), gets, copies the value out and resets; a write
// begins, puts or deletes, and commits. The environment is opened
// MDB_NOSYNC (as bbolt is NoSync) and MDB_NOTLS (goroutines move between
// threads).

/*
#cgo LDFLAGS: -llmdb
#include <lmdb.h>
#include <string.h>
#include <stdlib.h>

static int sb_open(const char *path, size_t mapsize, MDB_env **env, MDB_dbi *dbi) {
	int rc = mdb_env_create(env);
	if (rc) return rc;
	mdb_env_set_mapsize(*env, mapsize);
	mdb_env_set_maxreaders(*env, 126);
	rc = mdb_env_open(*env, path, MDB_NOSUBDIR | MDB_NOSYNC | MDB_NOTLS, 0600);
	if (rc) return rc;
	MDB_txn *txn;
	rc = mdb_txn_begin(*env, NULL, 0, &txn);
	if (rc) return rc;
	rc = mdb_dbi_open(txn, NULL, 0, dbi);
	if (rc) { mdb_txn_abort(txn); return rc; }
	return mdb_txn_commit(txn);
}

// sb_get copies the value of k into out (cap bytes) and returns its
// length, -1 when absent, or -2-rc on error.
static long sb_get(MDB_env *env, MDB_dbi dbi, MDB_txn **rtxn, char *k, size_t kl, char *out, size_t cap) {
	int rc;
	if (*rtxn == NULL) rc = mdb_txn_begin(env, NULL, MDB_RDONLY, rtxn);
	else rc = mdb_txn_renew(*rtxn);
	if (rc) return -2 - rc;
	MDB_val key = {kl, k}, val;
	rc = mdb_get(*rtxn, dbi, &key, &val);
	long n = -1;
	if (rc == 0) {
		n = val.mv_size;
		memcpy(out, val.mv_data, val.mv_size < cap ? val.mv_size : cap);
	} else if (rc != MDB_NOTFOUND) {
		n = -2 - rc;
	}
	mdb_txn_reset(*rtxn);
	return n;
}

// sb_write: op 0 put, 1 add 1 to an 8-byte counter, 2 delete (MDB_NOTFOUND
// when absent).
static int sb_write(MDB_env *env, MDB_dbi dbi, int op, char *k, size_t kl, char *v, size_t vl) {
	MDB_txn *txn;
	int rc = mdb_txn_begin(env, NULL, 0, &txn);
	if (rc) return rc;
	MDB_val key = {kl, k}, val = {vl, v};
	if (op == 0) {
		rc = mdb_put(txn, dbi, &key, &val, 0);
	} else if (op == 1) {
		unsigned long long n = 0;
		MDB_val cur;
		rc = mdb_get(txn, dbi, &key, &cur);
		if (rc == 0 && cur.mv_size == 8) memcpy(&n, cur.mv_data, 8);
		n++;
		MDB_val nv = {8, &n};
		rc = mdb_put(txn, dbi, &key, &nv, 0);
	} else {
		rc = mdb_del(txn, dbi, &key, NULL);
	}
	if (rc) { mdb_txn_abort(txn); return rc; }
	return mdb_txn_commit(txn);
}

static int sb_fill(MDB_env *env, MDB_dbi dbi, char *keys, size_t kl, size_t n, char *v, size_t vl) {
	MDB_txn *txn;
	int rc = mdb_txn_begin(env, NULL, 0, &txn);
	if (rc) return rc;
	for (size_t i = 0; i < n; i++) {
		MDB_val key = {kl, keys + i*kl}, val = {vl, v};
		rc = mdb_put(txn, dbi, &key, &val, 0);
		if (rc) { mdb_txn_abort(txn); return rc; }
	}
	return mdb_txn_commit(txn);
}
*/
import "C"

import (
	"fmt"
	"path/filepath"
	"unsafe"
)

func init() { lmdbOpen = openLMDB }

type lmdbStore struct {
	env  *C.MDB_env
	dbi  C.MDB_dbi
	rtxn *C.MDB_txn
	buf  []byte
}

func lmdbErr(rc C.int) error {
	return fmt.Errorf("lmdb: %s", C.GoString(C.mdb_strerror(rc)))
}

func openLMDB(env *benchEnv, vsize int, create bool) (Store, error) {
	path := C.CString(filepath.Join(env.dir, fmt.Sprintf("lmdb-%d", vsize)))
	defer C.free(unsafe.Pointer(path))
	s := &lmdbStore{buf: make([]byte, vsize)}
	if rc := C.sb_open(path, C.size_t(4<<30), &s.env, &s.dbi); rc != 0 {
		return nil, lmdbErr(rc)
	}
	return s, nil
}

func cstr(k string) (*C.char, C.size_t) {
	return (*C.char)(unsafe.Pointer(unsafe.StringData(k))), C.size_t(len(k))
}

func (s *lmdbStore) get(k string) bool {
	kp, kl := cstr(k)
	n := C.sb_get(s.env, s.dbi, &s.rtxn, kp, kl, (*C.char)(unsafe.Pointer(&s.buf[0])), C.size_t(len(s.buf)))
	return n >= 0
}

func (s *lmdbStore) write(op int, k string, val []byte) bool {
	kp, kl := cstr(k)
	var vp *C.char
	if len(val) > 0 {
		vp = (*C.char)(unsafe.Pointer(&val[0]))
	}
	return C.sb_write(s.env, s.dbi, C.int(op), kp, kl, vp, C.size_t(len(val))) == 0
}

func (s *lmdbStore) Do(op Op, keys []string, wmask uint32, val []byte) (bad int) {
	for i, k := range keys {
		var ok bool
		switch op {
		case OpReadHit:
			ok = s.get(k)
		case OpReadMiss:
			ok = !s.get(k)
		case OpOverwrite, OpInsert:
			ok = s.write(0, k, val)
		case OpAdd:
			ok = s.write(1, k, nil)
		case OpDelete:
			ok = s.write(2, k, nil)
		case OpMixed:
			if wmask&(1<<i) != 0 {
				ok = s.write(0, k, val)
			} else {
				ok = s.get(k)
			}
		}
		if !ok {
			bad++
		}
	}
	return bad
}

func (s *lmdbStore) Fill(keys []string, val []byte, counters []string) error {
	fill := func(keys []string, v []byte) error {
		for len(keys) > 0 {
			n := min(len(keys), 10000)
			flat := make([]byte, 0, n*keyLen)
			for _, k := range keys[:n] {
				if len(k) != keyLen {
					return fmt.Errorf("lmdb fill: key %q is not %d bytes", k, keyLen)
				}
				flat = append(flat, k...)
			}
			if rc := C.sb_fill(s.env, s.dbi, (*C.char)(unsafe.Pointer(&flat[0])), keyLen, C.size_t(n),
				(*C.char)(unsafe.Pointer(&v[0])), C.size_t(len(v))); rc != 0 {
				return lmdbErr(rc)
			}
			keys = keys[n:]
		}
		return nil
	}
	if err := fill(keys, val); err != nil {
		return err
	}
	return fill(counters, make([]byte, 8))
}

func (s *lmdbStore) Close() error {
	if s.rtxn != nil {
		C.mdb_txn_abort(s.rtxn)
		s.rtxn = nil
	}
	C.mdb_env_close(s.env)
	return nil
}

// Warm reads every key once, untimed (see warm): LMDB maps its file too.
func (s *lmdbStore) Warm(op Op, keys []string) {
	rop := OpReadHit
	if op == OpInsert {
		rop = OpReadMiss
	}
	for i := 0; i+batch <= len(keys); i += batch {
		s.Do(rop, keys[i:i+batch], 0, nil)
	}
}
