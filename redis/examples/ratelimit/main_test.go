package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shmarena/shmarena/redis/redistest"
)

// The example's verdict holds on a Redis server and on a 3-master Redis
// Cluster, started by the test; the run leaves no keys behind.
func TestRatelimitOnRedis(t *testing.T) {
	redistest.Require(t)
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	small := []string{"-workers=3", "-clients=6", "-windows=3", "-window=250ms", "-limit=10"}
	t.Run("server", func(t *testing.T) {
		s := redistest.StartServer(t)
		runPass(t, bin, append(small, "-backend=redis", "-redis="+s.Addr())...)
		out, err := exec.Command("redis-cli", "-p", strings.TrimPrefix(s.Addr(), "127.0.0.1:"), "dbsize").Output()
		if err != nil || strings.TrimSpace(string(out)) != "0" {
			t.Errorf("keys left on the server: %q %v", out, err)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3)
		runPass(t, bin, append(small, "-redis-cluster="+strings.Join(c.Addrs(), ","))...)
	})
	t.Run("local fails", func(t *testing.T) {
		s := redistest.StartServer(t)
		out, err := exec.Command(bin, append(small, "-backend=redis", "-redis="+s.Addr(), "-local")...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "\nverdict: FAIL") {
			t.Fatalf("want FAIL with -local: %v\n%s", err, out)
		}
	})
}

func runPass(t *testing.T, bin string, args ...string) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nverdict: PASS") {
		t.Fatalf("want PASS: %v\n%s", err, out)
	}
}
