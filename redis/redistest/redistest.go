// Package redistest starts real Redis servers and Redis Clusters for
// tests, on loopback ports, in temporary directories, from the
// redis-server and redis-cli binaries on PATH (Debian: apt-get install
// redis-server redis-tools), and stops them when the test ends.
//
// Without the binaries, Require skips the test saying so, except when the
// environment says CI=true: there a missing Redis fails the run.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Require skips tb (fails it under CI=true) unless redis-server and
// redis-cli are on PATH.
func Require(tb testing.TB) {
	tb.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true and %v", err)
		}
		tb.Skipf("%v; install them (Debian: apt-get install redis-server redis-tools) to run this test", err)
	}
}

// Available reports why Redis tests cannot run, or nil.
func Available() error {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found on PATH", bin)
		}
	}
	return nil
}

// A Server is one redis-server process on 127.0.0.1.
type Server struct {
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// StartServer starts a redis-server with no persistence on a free
// loopback port and stops it in tb.Cleanup.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	Require(tb)
	s, err := startServer(tb.TempDir(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func startServer(dir string, extra []string) (*Server, error) {
	var lastErr error
	for range 10 {
		port, err := freePort(len(extra) > 0)
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, dir: dir}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--loglevel", "warning", "--logfile", filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log"),
		}, extra...)
		if lastErr = s.Start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Start (re)starts the server on its port and waits until it answers.
func (s *Server) Start() error {
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	// The server dies with the test process, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if cmd.ProcessState != nil || processExited(cmd) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("redis-server on port %d did not answer (see %s)", s.Port, s.dir)
}

// processExited reports whether cmd's process is gone.
func processExited(cmd *exec.Cmd) bool {
	return cmd.Process.Signal(syscall.Signal(0)) != nil
}

// Stop kills the server (SIGKILL: the tests keep nothing on disk) and
// waits for it. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// freePort finds a loopback port that is free, and with bus also port +
// 10000 (a cluster node's bus port).
func freePort(bus bool) (int, error) {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		if lb, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			_ = lb.Close()
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free port pair")
}

// A Cluster is a Redis Cluster of masters on 127.0.0.1, no replicas.
type Cluster struct {
	Servers []*Server
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, s := range c.Servers {
		a = append(a, s.Addr())
	}
	return a
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
}

// StartCluster starts n >= 3 redis-server nodes with --cluster-enabled,
// joins them with redis-cli --cluster create --cluster-yes, waits until
// every node reports cluster_state:ok, and stops them in tb.Cleanup.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	Require(tb)
	c, err := NewCluster(tb.TempDir(), n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	return c
}

// NewCluster is StartCluster for callers without a testing.TB (a
// TestMain, a benchmark harness): the caller must Stop it.
func NewCluster(dir string, n int) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	c := &Cluster{}
	for i := range n {
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			c.Stop()
			return nil, err
		}
		s, err := startServer(nodeDir, []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	if err := c.waitOK(30 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK waits until every node says cluster_state:ok and knows n masters.
func (c *Cluster) waitOK(d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, s := range c.Servers {
		cl := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Servers))) {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				return fmt.Errorf("redistest: cluster not ok after %v: %v %q", d, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return nil
}

// NewServer is StartServer for callers without a testing.TB: the caller
// must Stop it.
func NewServer(dir string) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	return startServer(dir, nil)
}
