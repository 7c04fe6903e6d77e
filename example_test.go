package shmarena_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shmarena/shmarena"
)

func Example() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)

	// Every process opens the same path; the first creates the file.
	a, err := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(8<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()

	// Every process asks for the same map with the same shape.
	cache, err := a.Map("cache", shmarena.WithSlots(4096), shmarena.WithSlotSize(256))
	if err != nil {
		panic(err)
	}
	if err := cache.Store("user:42", []byte(`{"name":"Ada"}`), shmarena.WithTTL(time.Minute)); err != nil {
		panic(err)
	}
	v, ok := cache.Load("user:42")
	fmt.Println(string(v), ok)
	// Output: {"name":"Ada"} true
}

// A fixed-window rate limit shared by every process: one Add per request.
func ExampleMap_Add() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	limits, _ := a.Map("limits")

	const limit = 3
	for range 5 {
		// The TTL applies only when Add creates the counter, so the
		// window starts at the first request and the key lapses with it.
		n, _ := limits.Add("client:10.0.0.7", 1, shmarena.WithTTL(time.Second))
		fmt.Println(n, n <= limit)
	}
	// Output:
	// 1 true
	// 2 true
	// 3 true
	// 4 false
	// 5 false
}

// A work queue: each record goes to one member of the group.
func ExampleGroup() {
	dir, _ := os.MkdirTemp("", "shmarena-example")
	defer os.RemoveAll(dir)
	a, _ := shmarena.Open(filepath.Join(dir, "arena"), shmarena.WithSize(1<<20))
	defer a.Close()
	r, _ := a.Ring("work", shmarena.WithSlots(64), shmarena.WithSlotSize(128))

	// Join before publishing: a new group starts at the head.
	workers, _ := r.Group("workers", shmarena.WithTopic("jobs"))
	for _, job := range []string{"resize a.png", "resize b.png"} {
		if _, err := r.Publish("jobs", []byte(job)); err != nil {
			panic(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n := 0
	for rec := range workers.Records(ctx) {
		fmt.Println(rec.Seq, rec.Topic, string(rec.Payload))
		if n++; n == 2 {
			break
		}
	}
	// Output:
	// 1 jobs resize a.png
	// 2 jobs resize b.png
}

// Workers started with os/exec share an arena that has no path.
func ExampleOpenMemfd() {
	a, err := shmarena.OpenMemfd("jobs", shmarena.WithSize(1<<20))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	// cmd := exec.Command(worker); cmd.ExtraFiles = []*os.File{a.File()}
	// and in the worker: shmarena.OpenFile(os.NewFile(3, "arena"))
	fmt.Println(a.Path() == "", a.Size())
	// Output: true 1048576
}
