// Command shmarena inspects and operates a live shmarena arena file, the
// way redis-cli INFO, bbolt stats and mdb_stat do for theirs.
//
//	go install github.com/shmarena/shmarena/cmd/shmarena@latest
//
// Every subcommand works while other processes use the arena. Those that
// only look (info, stats, keys, get, dump, tail, check, locks) attach
// read-only (shmarena.ReadOnly): they need only read permission, take no
// entry in the arena's process table and never write a byte of the file.
// The others (set, incr, del, load, clear, drop-group, locks --recover)
// attach read-write, and clear, drop-group and locks --recover ask for
// confirmation unless --yes. Every subcommand takes --json for scripts,
// with one convention: snake_case field names, durations in whole
// milliseconds named so (ttl_ms), times in RFC 3339, and a key that is not
// UTF-8 as key_base64 (pass it back with --base64). Output for people is
// aligned tables with units.
//
//	shmarena info FILE                          header, regions, attached processes
//	shmarena stats FILE [REGION] [--watch 1s]   counters; --watch redraws with rates, like top
//	shmarena keys FILE MAP [--prefix P] [--limit N]
//	shmarena get FILE MAP KEY [--base64]        a value (hex view when not text; a typed map's as JSON); its TTL on stderr
//	shmarena ttl FILE MAP KEY                   how long a key has left
//	shmarena set FILE MAP KEY VALUE [--ttl 10m] store a value
//	shmarena incr FILE MAP KEY [BY]             add to a counter
//	shmarena del FILE MAP KEY
//	shmarena dump FILE MAP > out.jsonl          every key, value (base64), TTL and counter
//	shmarena load FILE MAP < out.jsonl          what dump wrote, back
//	shmarena tail FILE RING [--topic T] [-n N] [-f]
//	shmarena check FILE                         validate every region; exit 1 on a finding, 3 if part was not judged
//	shmarena locks FILE [--recover] [--yes]     held locks and their owners; take over dead ones
//	shmarena clear FILE MAP [--yes]
//	shmarena drop-group FILE RING GROUP [--yes]
//	shmarena version
//
// Exit status: 0 on success, 1 when the answer is "no" (check found
// something, get found no key, a confirmation was refused) or an
// operation failed, 2 for a usage error, 3 when check found nothing wrong
// but could not judge a map segment whose writers never paused.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shmarena/shmarena"
)

// env is where a subcommand reads and writes, so tests could run it in
// process; main wires it to the real streams.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	json           bool
}

// errNo is a "no" answer: exit status 1 with its message already printed.
var errNo = errors.New("no")

// errUnjudged is check's "nothing wrong, but not everything judged": exit
// status 3, its message already printed.
var errUnjudged = errors.New("not everything judged")

type command struct {
	args  string // positional arguments, for usage
	about string
	run   func(e *env, fs *flag.FlagSet, args []string) error
	flags func(fs *flag.FlagSet)
	min   int // positional arguments needed
	max   int
}

var commands map[string]*command

var order = []string{"info", "stats", "keys", "get", "ttl", "set", "incr", "del", "dump", "load", "tail", "check", "locks", "clear", "drop-group", "version"}

func init() {
	commands = map[string]*command{
		"info":       {args: "FILE", about: "header, regions and attached processes", run: runInfo, min: 1, max: 1},
		"stats":      {args: "FILE [REGION]", about: "counters of every region, or of one; --watch redraws with rates", run: runStats, flags: statsFlags, min: 1, max: 2},
		"keys":       {args: "FILE MAP", about: "a map's keys", run: runKeys, flags: keysFlags, min: 2, max: 2},
		"get":        {args: "FILE MAP KEY", about: "one value (its TTL on stderr)", run: runGet, flags: keyFlags, min: 3, max: 3},
		"ttl":        {args: "FILE MAP KEY", about: "how long a key has left", run: runTTL, flags: keyFlags, min: 3, max: 3},
		"set":        {args: "FILE MAP KEY VALUE", about: "store one value, --ttl for a deadline (writes)", run: runSet, flags: setFlags, min: 4, max: 4},
		"incr":       {args: "FILE MAP KEY [BY]", about: "add BY (default 1) to a counter and print it (writes)", run: runIncr, flags: keyFlags, min: 3, max: 4},
		"del":        {args: "FILE MAP KEY", about: "delete one key (writes)", run: runDel, flags: keyFlags, min: 3, max: 3},
		"dump":       {args: "FILE MAP", about: "every entry as JSON lines", run: runDump, min: 2, max: 2},
		"load":       {args: "FILE MAP", about: "store the JSON lines dump wrote (writes)", run: runLoad, min: 2, max: 2},
		"tail":       {args: "FILE RING", about: "a ring's records; -f follows, like tail -f", run: runTail, flags: tailFlags, min: 2, max: 2},
		"check":      {args: "FILE", about: "validate every region; exit 1 on a finding (3: part not judged)", run: runCheck, min: 1, max: 1},
		"locks":      {args: "FILE", about: "held locks and their owners; --recover takes over dead ones (writes)", run: runLocks, flags: locksFlags, min: 1, max: 1},
		"clear":      {args: "FILE MAP", about: "delete every key of a map (writes)", run: runClear, flags: yesFlag, min: 2, max: 2},
		"drop-group": {args: "FILE RING GROUP", about: "remove a consumer group (writes)", run: runDropGroup, flags: yesFlag, min: 3, max: 3},
		"version":    {args: "", about: "the command's version and the file layout version it reads", run: runVersion, min: 0, max: 0},
	}
}

func main() {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	os.Exit(run(e, os.Args[1:]))
}

// run runs one command line and returns the exit status.
func run(e *env, argv []string) int {
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help" {
		usage(e.stderr)
		if len(argv) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[argv[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "shmarena: unknown command %q\n\n", argv[0])
		usage(e.stderr)
		return 2
	}
	fs := flag.NewFlagSet("shmarena "+argv[0], flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.BoolVar(&e.json, "json", false, "print JSON, for scripts")
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: shmarena %s %s [flags]\n%s\n\nflags:\n", argv[0], c.args, c.about)
		fs.PrintDefaults()
	}
	args, err := parseInterleaved(fs, argv[1:])
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(args) < c.min || len(args) > c.max {
		fmt.Fprintf(e.stderr, "shmarena %s: want %s, got %d argument(s)\n", argv[0], c.args, len(args))
		fs.Usage()
		return 2
	}
	err = c.run(e, fs, args)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errNo):
		return 1
	case errors.Is(err, errUnjudged):
		return 3
	default:
		fmt.Fprintf(e.stderr, "%s\n", err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: shmarena COMMAND ARGS [flags]  (every command takes --json)\n\n")
	for _, name := range order {
		c := commands[name]
		fmt.Fprintf(w, "  %-11s %-16s %s\n", name, c.args, c.about)
	}
	fmt.Fprintf(w, "\nRun shmarena COMMAND -h for a command's flags.\n")
}

// parseInterleaved parses flags given before, between or after the
// positional arguments (shmarena stats FILE --watch 1s), and returns the
// positional ones. After "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// openRead attaches read-only.
func openRead(path string) (*shmarena.Arena, error) { return shmarena.Open(path, shmarena.ReadOnly()) }

// openWrite attaches read-write (never creating: a missing file is an
// error).
func openWrite(path string) (*shmarena.Arena, error) { return shmarena.Open(path) }

// printJSON writes v as indented JSON.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(styled(v))
}

// confirm asks question on stderr and reads y or yes from stdin.
func (e *env) confirm(yes bool, question string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(e.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	fmt.Fprintln(e.stderr, "not confirmed: nothing changed (pass --yes to skip the question)")
	return errNo
}

func yesFlag(fs *flag.FlagSet) { fs.Bool("yes", false, "do not ask for confirmation") }

func flagBool(fs *flag.FlagSet, name string) bool {
	return fs.Lookup(name).Value.(flag.Getter).Get().(bool)
}
