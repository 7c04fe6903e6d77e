package conformance

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunChild()
	os.Exit(m.Run())
}

func TestSharedMemory(t *testing.T) { Run(t, NewSharedMemory()) }
