package main

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/shmarena/shmarena"
	"github.com/shmarena/shmarena/internal/layout"
)

// This file: the subcommands that write one key (set, incr), ttl, and
// version.

func setFlags(fs *flag.FlagSet) {
	keyFlags(fs)
	fs.Duration("ttl", 0, "give the key a deadline `d` from now (such as 10m); none when not given")
}

// runSet stores VALUE (its bytes as given) at KEY, as redis-cli SET does.
// A typed map is refused: its values are msgpack encodings of a Go type.
func runSet(e *env, fs *flag.FlagSet, args []string) error {
	key, err := keyArg(fs, args[2])
	if err != nil {
		return err
	}
	var opts []shmarena.WriteOption
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "ttl" { // given: WithTTL refuses zero or less (docs/ttl.md)
			opts = append(opts, shmarena.WithTTL(f.Value.(flag.Getter).Get().(time.Duration)))
		}
	})
	a, m, typed, err := openMap(args[0], args[1], true)
	if err != nil {
		return err
	}
	defer a.Close()
	if typed {
		return fmt.Errorf("shmarena set: map %q is typed (msgpack values of a Go type): set writes bytes, which would not decode; write it from your program", args[1])
	}
	if err := m.Store(key, []byte(args[3]), opts...); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(struct{ Stored bool }{true})
	}
	fmt.Fprintf(e.stdout, "stored %s\n", showBytes([]byte(key)))
	return nil
}

// runIncr adds BY (default 1) to the counter at KEY, creating it at BY, as
// redis-cli INCRBY does, and prints the new value.
func runIncr(e *env, fs *flag.FlagSet, args []string) error {
	key, err := keyArg(fs, args[2])
	if err != nil {
		return err
	}
	by := int64(1)
	if len(args) > 3 {
		if by, err = strconv.ParseInt(args[3], 10, 64); err != nil {
			return fmt.Errorf("shmarena incr: BY %q is not a whole number", args[3])
		}
	}
	a, m, _, err := openMap(args[0], args[1], true)
	if err != nil {
		return err
	}
	defer a.Close()
	n, err := m.Add(key, by)
	if err != nil {
		return err
	}
	if e.json {
		return e.printJSON(struct{ Value int64 }{n})
	}
	fmt.Fprintln(e.stdout, n)
	return nil
}

// runTTL prints how long KEY has left, as redis-cli PTTL does in words:
// "no deadline" for a key without one; a missing key is a "no" (exit 1).
func runTTL(e *env, fs *flag.FlagSet, args []string) error {
	key, err := keyArg(fs, args[2])
	if err != nil {
		return err
	}
	a, m, _, err := openMap(args[0], args[1], false)
	if err != nil {
		return err
	}
	defer a.Close()
	left, ok := m.TTL(key)
	if !ok {
		if e.json {
			if err := e.printJSON(struct {
				Exists bool
				TTL    *time.Duration
			}{}); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(e.stderr, "shmarena ttl: map %q has no key %q (or it lapsed)\n", args[1], key)
		}
		return errNo
	}
	if e.json {
		out := struct {
			Exists bool
			TTL    *time.Duration // null: no deadline
		}{Exists: true}
		if left > 0 {
			out.TTL = &left
		}
		return e.printJSON(out)
	}
	if left == 0 {
		fmt.Fprintln(e.stdout, "no deadline")
		return nil
	}
	fmt.Fprintln(e.stdout, durationText(left))
	return nil
}

// runVersion prints the command's module version and the file layout
// version it reads.
func runVersion(e *env, fs *flag.FlagSet, args []string) error {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	if e.json {
		return e.printJSON(struct {
			Version       string
			LayoutVersion uint32
		}{v, layout.Version})
	}
	fmt.Fprintf(e.stdout, "shmarena %s, file layout version %d\n", v, layout.Version)
	return nil
}
