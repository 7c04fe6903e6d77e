package lincheck

import (
	"fmt"
	"os"
	"testing"
)

// Worker processes re-execute this test binary: TestMain runs the worker
// when the environment names the role, and its exit status is its verdict.
func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if role != "worker" {
			fmt.Fprintf(os.Stderr, "lincheck: unknown role %q\n", role)
			os.Exit(3)
		}
		if err := workerMain(); err != nil {
			fmt.Fprintf(os.Stderr, "lincheck worker: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
