package shmarena

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shmarena/shmarena/internal/mem"
	"github.com/stretchr/testify/require"
)

// Adder processes Add to a few counters (lock-free where they can) and
// count what they added; taker processes take counter values only through
// the writes that return or compare them (LoadAndDelete, Swap,
// CompareAndSwap, CompareAndDelete), and churn filler keys and deadlines in
// the same tiny table. Every successful Add must be taken or left exactly
// once.

var procCounters = []string{"c0", "c1", "c2", "c3"}

func procFiller(i int) string { return "f" + strconv.Itoa(i) }

func procCounterMap() (*Arena, *Map, error) {
	a, err := Open(os.Getenv("SHMARENA_PATH"))
	if err != nil {
		return nil, nil, err
	}
	ss, _ := strconv.Atoi(os.Getenv("SHMARENA_SLOTSIZE"))
	m, err := a.Map("m", WithSlots(16), WithSlotSize(ss), WithStripes(4))
	return a, m, err
}

func init() {
	childRoles["counter-adder"] = func() error {
		a, m, err := procCounterMap()
		if err != nil {
			return err
		}
		defer a.Close()
		r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
		got := make([]int64, len(procCounters))
		for i := 0; ; i++ {
			if i%64 == 0 && m.Exists("stop") {
				break
			}
			k := r.IntN(len(procCounters))
			d := int64(r.IntN(5) + 1)
			_, err := m.Add(procCounters[k], d)
			switch {
			case err == nil:
				got[k] += d
			case errors.Is(err, ErrNotCounter), errors.Is(err, ErrFull):
			default:
				return err
			}
		}
		for k, n := range got {
			fmt.Printf("add %d %d\n", k, n)
		}
		return nil
	}
	childRoles["counter-taker"] = func() error {
		if os.Getenv("SHMARENA_NOCAS") == "1" && mem.HasCAS128 {
			return fmt.Errorf("GODEBUG=cpu.cx16=off did not clear HasCAS128")
		}
		a, m, err := procCounterMap()
		if err != nil {
			return err
		}
		defer a.Close()
		r := rand.New(rand.NewPCG(uint64(os.Getpid()), 2))
		took := make([]int64, len(procCounters))
		take := func(k int, b []byte) error {
			if len(b) != 8 {
				if string(b) == "x:"+procCounters[k] {
					return nil
				}
				return fmt.Errorf("key %s took %q", procCounters[k], b)
			}
			took[k] += int64(binary.LittleEndian.Uint64(b))
			return nil
		}
		le := func(n int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }
		iters := envInt("SHMARENA_ITERS")
		for i := 0; i < iters; i++ {
			k := r.IntN(len(procCounters))
			key := procCounters[k]
			switch r.IntN(8) {
			case 0:
				if v, ok := m.LoadAndDelete(key); ok {
					if err := take(k, v); err != nil {
						return err
					}
				}
			case 1:
				prev, loaded, err := m.Swap(key, []byte("x:"+key))
				if err != nil && !errors.Is(err, ErrFull) {
					return err
				}
				if loaded {
					if err := take(k, prev); err != nil {
						return err
					}
				}
				if v, ok := m.LoadAndDelete(key); ok {
					if err := take(k, v); err != nil {
						return err
					}
				}
			case 2:
				if n, ok := m.Counter(key); ok {
					sw, err := m.CompareAndSwap(key, le(n), []byte("x:"+key))
					if err != nil {
						return err
					}
					if sw {
						took[k] += n
						if v, ok := m.LoadAndDelete(key); ok {
							if err := take(k, v); err != nil {
								return err
							}
						}
					}
				}
			case 3:
				if n, ok := m.Counter(key); ok && m.CompareAndDelete(key, le(n)) {
					took[k] += n
				}
			case 4, 5:
				m.Expire(key, time.Hour)
				m.Persist(key)
			default:
				f := procFiller(r.IntN(10))
				if r.IntN(2) == 0 {
					_ = m.Store(f, []byte("v:"+f))
				} else {
					m.Delete(f)
				}
			}
			// Every filler present reads as its own value.
			for j := 0; j < 10; j++ {
				f := procFiller(j)
				if v, ok := m.Load(f); ok && string(v) != "v:"+f {
					return fmt.Errorf("filler %s reads %q", f, v)
				}
			}
		}
		for k, n := range took {
			fmt.Printf("take %d %d\n", k, n)
		}
		return nil
	}
}

func TestAddProcessesWithValueDecidingWrites(t *testing.T) {
	// 48 and 64: every slot 16-aligned; 56: every other one is not, and
	// its counters take the locked path.
	for _, ss := range []int{48, 56, 64} {
		t.Run(fmt.Sprintf("slot%d", ss), func(t *testing.T) { counterStress(t, ss, "") })
	}
}

// The takers run without CAS128 (GODEBUG=cpu.cx16=off, as a GOARCH=386
// build of the same program would; the file's header lets both attach),
// while the adders add lock-free: the takers must pin all the same.
func TestAddProcessesMixedModes(t *testing.T) {
	if !mem.HasCAS128 {
		t.Skip("no lock-free adders here")
	}
	counterStress(t, 64, "takers")
}

func counterStress(t *testing.T, ss int, noCAS string) {
	a, path := tempArena(t, 1<<20)
	m, err := a.Map("m", WithSlots(16), WithSlotSize(ss), WithStripes(4))
	require.NoError(t, err)
	env := []string{"SHMARENA_PATH=" + path, "SHMARENA_SLOTSIZE=" + strconv.Itoa(ss), "SHMARENA_ITERS=" + strconv.Itoa(raceScaled(30000))}
	takerEnv := env
	if noCAS == "takers" {
		takerEnv = append(env[:len(env):len(env)], "SHMARENA_NOCAS=1", "GODEBUG=cpu.cx16=off")
	}
	var outs []*bytes.Buffer
	start := func(role string, env []string) *exec.Cmd {
		c := child(t, role, env...)
		b := new(bytes.Buffer)
		c.Stdout = b
		outs = append(outs, b)
		require.NoError(t, c.Start())
		return c
	}
	var takers, adders []*exec.Cmd
	for range 3 {
		adders = append(adders, start("counter-adder", env))
	}
	for range 2 {
		takers = append(takers, start("counter-taker", takerEnv))
	}
	for _, c := range takers {
		require.NoError(t, c.Wait())
	}
	require.NoError(t, m.Store("stop", []byte("1")))
	for _, c := range adders {
		require.NoError(t, c.Wait())
	}
	added := make([]int64, len(procCounters))
	taken := make([]int64, len(procCounters))
	for _, b := range outs {
		sc := bufio.NewScanner(b)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			k, _ := strconv.Atoi(f[1])
			n, _ := strconv.ParseInt(f[2], 10, 64)
			if f[0] == "add" {
				added[k] += n
			} else {
				taken[k] += n
			}
		}
	}
	for k, key := range procCounters {
		left, _ := m.Counter(key)
		t.Logf("%s: added %d taken %d left %d", key, added[k], taken[k], left)
		require.Positive(t, taken[k], "the race was not run")
		require.Equal(t, added[k], taken[k]+left, "key %s: adds lost or doubled", key)
	}
	for k, v := range m.All() {
		if strings.HasPrefix(k, "f") {
			require.Equal(t, "v:"+k, string(v))
		}
	}
}

// Close lands between addInPlace's read and its compare-and-swap: the Add
// takes effect in the file or reports ErrClosed, also when a crafted file
// holds a live counter whose version is 0 (as the zero pages that replace
// the mapping at Close do).
func TestAddRacingClose(t *testing.T) {
	for _, zeroVersion := range []bool{false, true} {
		t.Run(fmt.Sprintf("zeroVersion=%v", zeroVersion), func(t *testing.T) {
			a, path := tempArena(t, 1<<20)
			m, err := a.Map("m", WithSlots(64), WithSlotSize(64))
			require.NoError(t, err)
			_, err = m.Add("k", 10)
			require.NoError(t, err)
			v, _, ok := m.readKey("k", m.hashKey("k"), nil, false)
			require.True(t, ok)
			if zeroVersion { // a crafted file: a live counter whose version is 0
				mem.Store64(m.mem, v.off+sVersion, 0)
			}
			crashHook = func(p string) {
				if p == "add-in-place" {
					require.NoError(t, a.Close())
				}
			}
			defer func() { crashHook = nil }()
			n, err := m.Add("k", 5)
			crashHook = nil
			t.Logf("Add after Close: n=%d err=%v", n, err)
			b, err2 := Open(path)
			require.NoError(t, err2)
			defer b.Close()
			m2, err2 := b.Map("m", WithSlots(64), WithSlotSize(64))
			require.NoError(t, err2)
			c, _ := m2.Counter("k")
			t.Logf("counter in the file: %d", c)
			if err == nil {
				require.Equal(t, int64(15), c, "Add reported success (n=%d) but the file holds %d", n, c)
			} else {
				require.ErrorIs(t, err, ErrClosed)
				require.Equal(t, int64(10), c)
			}
		})
	}
}
