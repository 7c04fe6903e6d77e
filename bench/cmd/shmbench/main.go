// Command shmbench measures shmarena's map and ring against in-process
// floors (a Go map behind sync.RWMutex, sync.Map) and cross-process peers
// (bbolt, LMDB when built with -tags lmdb, Redis over loopback, a Unix
// socket, a pipe, Redis Streams), and writes a markdown report with SVG
// charts. See ../../run.sh.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const keyLen = 24

// benchEnv is what the parent and its workers agree on.
type benchEnv struct {
	dir       string // scratch directory (tmpfs when there is one)
	redisAddr string // "" when Redis is skipped
	nkeys     int    // keys per value size
	mapSlots  int    // shmarena map capacity
	dur       time.Duration
	reps      int

	hit, miss, ctr []string
	masks          []uint32
}

var (
	flagShort     = flag.Bool("short", os.Getenv("SHMBENCH_SHORT") != "", "quick mode: small key set, short runs (also SHMBENCH_SHORT=1)")
	flagOut       = flag.String("out", ".", "directory for results.md and the SVG charts")
	flagRedis     = flag.String("redis", "auto", `"auto" starts redis-server on 127.0.0.1 if installed; "off" skips Redis; else host:port of a running server`)
	flagDur       = flag.Duration("dur", 0, "time per measurement (default 150ms, 40ms with -short)")
	flagReps      = flag.Int("reps", 0, "rounds per cell, each alternating the peers; ratios are the median of the rounds (default 3, at least 3)")
	flagPeers     = flag.String("peers", "", "comma-separated map peers to run (default all), e.g. shmarena for profiling")
	flagOnly      = flag.String("only", "map,ring,redisws,values,latency,touch,scale", "sections to run")
	flagHugeDir   = flag.String("hugedir", "", "a directory on a tmpfs mounted with huge=always: the first-touch section also measures an arena there (run.sh mounts one when it can)")
	flagRingDur   = flag.Duration("ringdur", 0, "ring section: length of one throughput round (default 500ms)")
	flagRingPeers = flag.String("ringpeers", "", `ring section: comma-separated transports to run (default all), e.g. "shmarena ring,Unix socket"`)
	flagMaxSlot   = flag.Int("maxslots", 10_000_000, "largest map in the growth curve")
	flagCPU       = flag.String("cpuprofile", "", "write a CPU profile of the parent process here")
	flagProfOp    = flag.String("profile-op", "", "instead of the report, run shmarena's op (e.g. \"read hit\") for -dur under -cpuprofile")

	// worker mode (the parent re-executes itself)
	flagWorker = flag.String("worker", "", "internal: run as a worker process (map or ring role)")
	flagWPeer  = flag.String("w.peer", "", "internal")
	flagWOp    = flag.Int("w.op", 0, "internal")
	flagWVal   = flag.Int("w.vsize", 0, "internal")
	flagWRun   = flag.Int("w.run", 0, "internal")
	flagWDir   = flag.String("w.dir", "", "internal")
	flagWRAddr = flag.String("w.redis", "", "internal")
	flagWKeys  = flag.Int("w.keys", 0, "internal")
	flagWSlots = flag.Int("w.slots", 0, "internal")
	flagWDur   = flag.Duration("w.dur", 0, "internal")
	flagWArg   = flag.String("w.arg", "", "internal")
)

func main() {
	flag.Parse()
	if *flagWorker != "" {
		if err := worker(); err != nil {
			fmt.Fprintln(os.Stderr, "shmbench worker:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shmbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func newEnv(dir, redisAddr string, nkeys, slots int, dur time.Duration) *benchEnv {
	env := &benchEnv{dir: dir, redisAddr: redisAddr, nkeys: nkeys, mapSlots: slots, dur: dur}
	env.hit = genKeys("key:", nkeys)
	env.miss = genKeys("mis:", nkeys)
	env.ctr = genKeys("ctr:", nkeys)
	r := rand.New(rand.NewPCG(7, 7))
	env.masks = make([]uint32, 4096)
	for i := range env.masks {
		for bit := 0; bit < batch; bit++ {
			if r.IntN(10) == 0 {
				env.masks[i] |= 1 << bit
			}
		}
	}
	return env
}

func genKeys(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s%0*d", prefix, keyLen-len(prefix), i)
	}
	return ks
}

func shuffled(ks []string, seed uint64) []string {
	out := append([]string(nil), ks...)
	r := rand.New(rand.NewPCG(seed, 99))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// keysFor returns the key sequence worker proc uses for op in run; it is
// a multiple of batch long.
func (env *benchEnv) keysFor(op Op, run, proc int) []string {
	var ks []string
	switch op {
	case OpReadHit, OpOverwrite, OpMixed:
		ks = shuffled(env.hit, uint64(proc+1))
	case OpReadMiss:
		ks = shuffled(env.miss, uint64(proc+1))
	case OpAdd:
		ks = shuffled(env.ctr, uint64(proc+1))
	case OpInsert:
		ks = genKeys(fmt.Sprintf("n%03d%d:", run%1000, proc), env.nkeys/10)
	case OpDelete:
		for i := proc; i < len(env.hit); i += 2 {
			ks = append(ks, env.hit[i])
		}
		ks = shuffled(ks, uint64(proc+1))
	}
	return ks[:len(ks)/batch*batch]
}

// bounded ops stop when their key sequence is used up (each key once).
func bounded(op Op) bool { return op == OpInsert || op == OpDelete }

// warm makes one untimed pass over keys, in this process, for the
// stores that map a file (shmarena, LMDB; shmarena also prefaults before
// inserts, see shmStore.Warm): a process's first access to
// each page of a mapping costs a page fault and, on this VM, a
// hypervisor exit (5-7 µs per 4 KiB page against tens of ns for a warm
// operation), which would otherwise dominate a short run of a freshly
// started worker. The first-touch section measures that cost on purpose.
func warm(st Store, op Op, keys []string) {
	if w, ok := st.(interface{ Warm(Op, []string) }); ok {
		w.Warm(op, keys)
	}
}

type result struct {
	ops int
	el  time.Duration
	bad int
}

func runLoop(st Store, op Op, keys []string, masks []uint32, val []byte, dur time.Duration) result {
	var r result
	n := len(keys)
	start := time.Now()
	deadline := start.Add(dur)
	for i, nb := 0, 0; ; nb++ {
		if bounded(op) && i >= n {
			break
		}
		j := i % n
		r.bad += st.Do(op, keys[j:j+batch], masks[nb%len(masks)], val)
		i += batch
		r.ops += batch
		if nb&3 == 3 && time.Now().After(deadline) {
			break
		}
	}
	r.el = time.Since(start)
	return r
}

func valueOf(vsize int) []byte {
	v := make([]byte, vsize)
	for i := range v {
		v[i] = byte('a' + i%26)
	}
	return v
}

// --- redis-server ---

type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis() (*redisServer, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "redis-server is not installed (apt-get install -y redis-server)", nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--protected-mode", "no", "--databases", "4", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the harness
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	s := &redisServer{cmd: cmd, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	c := redis.NewClient(&redis.Options{Addr: s.addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return s, "", nil
		}
		if i == 100 {
			s.stop()
			return nil, "", fmt.Errorf("redis-server on %s did not answer PING", s.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

func redisVersion(addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(l, "redis_version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// --- worker processes ---

// spawn starts this binary as a worker, waits for it to say ready, and
// returns it; go() releases it and wait() collects its one result line.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func spawn(args ...string) (*child, error) { return spawnFiles(nil, args...) }

func spawnFiles(files []*os.File, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = files
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outp)}
	line, err := c.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("worker %v did not get ready: %q %v", args, line, err)
	}
	return c, nil
}

func (c *child) start() error { _, err := io.WriteString(c.in, "go\n"); return err }

func (c *child) wait() (string, error) {
	line, err := c.out.ReadString('\n')
	werr := c.cmd.Wait()
	if err != nil {
		return "", fmt.Errorf("worker result: %v (exit: %v)", err, werr)
	}
	return strings.TrimSpace(line), werr
}

// awaitGo is the worker's side: say ready, block until released.
func awaitGo() error {
	fmt.Println("ready")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("no go from parent: %q %v", line, err)
	}
	return nil
}

func worker() error {
	switch *flagWorker {
	case "map":
		env := newEnv(*flagWDir, *flagWRAddr, *flagWKeys, *flagWSlots, *flagWDur)
		var p *peer
		for _, q := range peers(env) {
			if q.name == *flagWPeer {
				p = &q
			}
		}
		if p == nil {
			return fmt.Errorf("no peer %q", *flagWPeer)
		}
		st, err := p.open(env, *flagWVal, false)
		if err != nil {
			return err
		}
		defer st.Close()
		op := Op(*flagWOp)
		keys := env.keysFor(op, *flagWRun, 1)
		val := valueOf(*flagWVal)
		warm(st, op, keys)
		if err := awaitGo(); err != nil {
			return err
		}
		if d := os.Getenv("SHMBENCH_WORKER_PROFILE"); d != "" {
			// Profile this worker's half of a 2-process run (for finding
			// what slows shmarena under a second process).
			name := strings.NewReplacer(" ", "_", "/", "_", ".", "_").Replace(fmt.Sprintf("%s-%v-%d", p.name, op, *flagWVal))
			f, err := os.Create(filepath.Join(d, name+".pprof"))
			if err != nil {
				return err
			}
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		r := runLoop(st, op, keys, env.masks[len(env.masks)/2:], val, env.dur)
		fmt.Printf("%d %d %d\n", r.ops, r.el.Nanoseconds(), r.bad)
		return nil
	case "ring":
		if d := os.Getenv("SHMBENCH_WORKER_PROFILE"); d != "" && strings.HasPrefix(*flagWArg, "tput") {
			name := strings.NewReplacer(" ", "_", "+", "_").Replace("ring-producer-" + *flagWPeer)
			f, err := os.Create(filepath.Join(d, name+".pprof"))
			if err != nil {
				return err
			}
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		if err := ringWorker(*flagWPeer, *flagWDir, *flagWRAddr, *flagWArg); err != nil {
			return err
		}
		fmt.Println("done")
		return nil
	case "lat":
		if err := latWorker(*flagWPeer, *flagWDir, *flagWRAddr, *flagWArg, *flagWDur); err != nil {
			return err
		}
		fmt.Println("done")
		return nil
	case "touch":
		return touchWorker(*flagWDir, *flagWArg, *flagWKeys)
	}
	return fmt.Errorf("unknown worker role %q", *flagWorker)
}

// --- the map comparison ---

type cell struct {
	vsize, procs int
	op           Op
	peer         string
	opsPerSec    float64   // the median of runs
	runs         []float64 // ops/s of each round, in round order
	bad          int
	note         string
}

func mapBench(env *benchEnv, vsizes []int) ([]cell, []string, error) {
	var cells []cell
	var notes []string
	ps := peers(env)
	if *flagPeers != "" {
		var keep []peer
		for _, p := range ps {
			if has(*flagPeers, p.name) {
				keep = append(keep, p)
			}
		}
		ps = keep
	}
	run := 0
	for _, vsize := range vsizes {
		val := valueOf(vsize)
		stores := make([]Store, len(ps))
		for i, p := range ps {
			st, err := p.open(env, vsize, true)
			if err == nil {
				err = st.Fill(env.hit, val, env.ctr)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s (%d-byte values) skipped: %v", p.name, vsize, err))
				continue
			}
			stores[i] = st
		}
		for op := Op(0); op < numOps; op++ {
			for procs := 1; procs <= 2; procs++ {
				// Each peer is measured reps times, in rounds that
				// alternate the peers (ours, theirs, ..., ours, theirs):
				// the machine is shared and its speed drifts, so a ratio is
				// taken within a round, and reported as the median of the
				// rounds with their range.
				best := make([]cell, len(ps))
				for rep := 0; rep < env.reps; rep++ {
					for i, p := range ps {
						st := stores[i]
						if st == nil {
							continue
						}
						run++
						c := cell{vsize: vsize, procs: procs, op: op, peer: p.name}
						if op == OpDelete {
							if err := st.Fill(env.hit, val, nil); err != nil {
								return nil, nil, err
							}
						}
						runtime.GC()
						var err error
						switch {
						case procs == 1:
							keys := env.keysFor(op, run, 0)
							warm(st, op, keys)
							r := runLoop(st, op, keys, env.masks, val, env.dur)
							c.opsPerSec, c.bad = float64(r.ops)/r.el.Seconds(), r.bad
						case p.twoNA != "":
							c.note = "n/a"
						case !p.shared:
							c.opsPerSec, c.bad = twoGoroutines(env, st, op, run, val)
							c.note = "2 goroutines"
						default:
							c.opsPerSec, c.bad, err = twoProcs(env, p, st, op, run, vsize, val)
						}
						if err != nil {
							return nil, nil, fmt.Errorf("%s %v x2: %w", p.name, op, err)
						}
						if c.bad > 0 {
							notes = append(notes, fmt.Sprintf("%s %v (%d-byte values, %d procs): %d operations did not do what they should", p.name, op, vsize, procs, c.bad))
						}
						if rep == 0 {
							best[i] = c
						}
						best[i].runs = append(best[i].runs, c.opsPerSec)
					}
				}
				for i, p := range ps {
					if stores[i] == nil {
						continue
					}
					c := best[i]
					c.opsPerSec = median(c.runs)
					logf("  %-12s %4dB %-11s x%d  %14.0f ops/s %s", p.name, vsize, op, procs, c.opsPerSec, c.note)
					cells = append(cells, c)
				}
			}
		}
		for _, st := range stores {
			if st != nil {
				st.Close()
			}
		}
	}
	for _, p := range ps {
		if p.twoNA != "" {
			notes = append(notes, fmt.Sprintf("%s has no 2-process run: %s.", p.name, p.twoNA))
		}
		if !p.shared && p.twoNA == "" {
			notes = append(notes, fmt.Sprintf("%s lives in one process: its \"2\" column is two goroutines on one map.", p.name))
		}
	}
	return cells, notes, nil
}

func twoGoroutines(env *benchEnv, st Store, op Op, run int, val []byte) (float64, int) {
	var wg sync.WaitGroup
	var rs [2]result
	for g := 0; g < 2; g++ {
		keys := env.keysFor(op, run, g)
		wg.Go(func() { rs[g] = runLoop(st, op, keys, env.masks[g*len(env.masks)/2:], val, env.dur) })
	}
	wg.Wait()
	return float64(rs[0].ops+rs[1].ops) / max(rs[0].el, rs[1].el).Seconds(), rs[0].bad + rs[1].bad
}

// twoProcs runs op in this process and in a worker process at once and
// returns the aggregate rate: all operations over the longer elapsed time.
func twoProcs(env *benchEnv, p peer, st Store, op Op, run, vsize int, val []byte) (float64, int, error) {
	c, err := spawn("-worker=map", "-w.peer="+p.name, fmt.Sprint("-w.op=", int(op)), fmt.Sprint("-w.vsize=", vsize),
		fmt.Sprint("-w.run=", run), "-w.dir="+env.dir, "-w.redis="+env.redisAddr, fmt.Sprint("-w.keys=", env.nkeys),
		fmt.Sprint("-w.slots=", env.mapSlots), fmt.Sprint("-w.dur=", env.dur))
	if err != nil {
		return 0, 0, err
	}
	keys := env.keysFor(op, run, 0)
	warm(st, op, keys)
	if err := c.start(); err != nil {
		return 0, 0, err
	}
	r := runLoop(st, op, keys, env.masks, val, env.dur)
	line, err := c.wait()
	if err != nil {
		return 0, 0, err
	}
	var ops, ns, bad int64
	if _, err := fmt.Sscan(line, &ops, &ns, &bad); err != nil {
		return 0, 0, fmt.Errorf("worker said %q", line)
	}
	el := max(r.el, time.Duration(ns))
	return float64(int64(r.ops)+ops) / el.Seconds(), r.bad + int(bad), nil
}

// --- top level ---

func scratchDir() (string, error) {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return os.MkdirTemp("/dev/shm", "shmbench-")
	}
	return os.MkdirTemp("", "shmbench-")
}

func has(list, s string) bool {
	for _, x := range strings.Split(list, ",") {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

func run() error {
	short := *flagShort
	dur := *flagDur
	if dur == 0 {
		dur = 150 * time.Millisecond
		if short {
			dur = 40 * time.Millisecond
		}
	}
	nkeys, slots, reps := 100_000, 1<<18, 3
	vsizes := []int{64, 512}
	if short {
		nkeys, slots, reps = 10_000, 1<<15, 3
		vsizes = []int{64}
	}
	if *flagReps > 0 {
		reps = max(*flagReps, 3) // a median and a range need three
	}
	dir, err := scratchDir()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		os.RemoveAll(dir) // redis-server and workers die with us (Pdeathsig, pipes)
		os.Exit(1)
	}()
	if *flagCPU != "" {
		f, err := os.Create(*flagCPU)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *flagProfOp != "" {
		return profileOp(dir, *flagProfOp, nkeys, slots, dur)
	}

	rep := &report{machine: machineInfo(), short: short, dur: dur, nkeys: nkeys, slots: slots}
	addr := ""
	switch *flagRedis {
	case "off":
		rep.notes = append(rep.notes, "Redis skipped: -redis=off.")
	case "auto":
		srv, why, err := startRedis()
		if err != nil {
			return err
		}
		if srv == nil {
			rep.notes = append(rep.notes, "Redis skipped: "+why+".")
			logf("Redis skipped: %s", why)
		} else {
			defer srv.stop()
			addr = srv.addr
		}
	default:
		addr = *flagRedis
	}
	if addr != "" {
		rep.machine = append(rep.machine, "redis-server "+redisVersion(addr)+" on "+addr+" (--save '' --appendonly no)")
	}
	if lmdbOpen == nil {
		rep.notes = append(rep.notes, lmdbMissing)
	} else {
		rep.notes = append(rep.notes, "LMDB through a minimal cgo binding over Debian's liblmdb-dev (cmd/shmbench/lmdb.go, -tags lmdb): "+
			"the maintained Go binding github.com/PowerDNS/lmdb-go is refused by this machine's Go module proxy (403). "+
			"MDB_NOSYNC, one write transaction per write, reads renew a reset read-only transaction; one cgo call per operation.")
	}
	rep.machine = append(rep.machine, "load average at start: "+loadAvg())

	env := newEnv(dir, addr, nkeys, slots, dur)
	env.reps = reps
	rep.reps = reps
	t0 := time.Now()
	if has(*flagOnly, "map") {
		logf("map comparison: %d keys, %v per measurement", nkeys, dur)
		cells, notes, err := mapBench(env, vsizes)
		if err != nil {
			return err
		}
		rep.cells = cells
		for _, p := range peers(env) {
			if *flagPeers == "" || has(*flagPeers, p.name) {
				rep.peers = append(rep.peers, p.name)
			}
		}
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "ring") {
		logf("ring comparison")
		rr, notes, err := ringBench(dir, addr, short)
		if err != nil {
			return err
		}
		rep.ring = rr
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "redisws") {
		logf("read hit against Redis GET by working set")
		rr, notes, err := redisRatioBench(dir, addr, short, dur, reps)
		if err != nil {
			return err
		}
		rep.redisWS = rr
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "values") {
		logf("values of any size")
		vr, notes, err := valuesBench(dir, addr, short, dur, reps)
		if err != nil {
			return err
		}
		rep.values = vr
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "latency") {
		logf("latency")
		lr, notes, err := latencyBench(dir, addr, short)
		if err != nil {
			return err
		}
		rep.lat = lr
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "touch") {
		logf("first touch")
		tr, notes, err := touchBench(dir, *flagHugeDir, short)
		if err != nil {
			return err
		}
		rep.touch = tr
		rep.notes = append(rep.notes, notes...)
	}
	if has(*flagOnly, "scale") {
		logf("scaling")
		sc, notes, err := scaleBench(dir, short, *flagMaxSlot)
		if err != nil {
			return err
		}
		rep.scale = sc
		rep.notes = append(rep.notes, notes...)
	}
	rep.elapsed = time.Since(t0)
	rep.notes = append(rep.notes, "Load average at the end: "+loadAvg()+" (other tenants share this 2-core machine; every figure is slowed by them, in-memory ones most).")
	if err := os.MkdirAll(*flagOut, 0o755); err != nil {
		return err
	}
	md := rep.markdown()
	// Hand-written notes kept beside the report (measurements made outside
	// the harness, what moved between runs and why) follow it, so that a
	// re-run keeps them.
	if extra, err := os.ReadFile(filepath.Join(*flagOut, "results-notes.md")); err == nil {
		md += "\n" + string(extra)
	}
	fmt.Print(md)
	if err := os.WriteFile(filepath.Join(*flagOut, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	return rep.charts(*flagOut)
}

// profileOp runs one shmarena operation alone, for -cpuprofile.
func profileOp(dir, name string, nkeys, slots int, dur time.Duration) error {
	var op Op = -1
	for o := Op(0); o < numOps; o++ {
		if o.String() == name {
			op = o
		}
	}
	if op < 0 {
		return fmt.Errorf("no op %q (one of %q)", name, opNames)
	}
	env := newEnv(dir, "", nkeys, slots, dur)
	st, err := openShm(env, 64, true)
	if err != nil {
		return err
	}
	defer st.Close()
	val := valueOf(64)
	if err := st.Fill(env.hit, val, env.ctr); err != nil {
		return err
	}
	r := runLoop(st, op, env.keysFor(op, 1, 0), env.masks, val, dur)
	fmt.Printf("shmarena %v: %.0f ops/s (%d ops, %d bad)\n", op, float64(r.ops)/r.el.Seconds(), r.ops, r.bad)
	return nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
