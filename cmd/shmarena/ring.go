package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/shmarena/shmarena"
)

func tailFlags(fs *flag.FlagSet) {
	fs.String("topic", "", "only records of `topic`")
	fs.Int("n", 10, "print the last `n` records the ring holds first (0: none, -1: all)")
	fs.Bool("f", false, "follow: print records as they are published, until interrupted")
}

// tailRecord is one record as tail --json prints it (one JSON object a
// line); Text is the payload when it is text.
type tailRecord struct {
	Seq     uint64
	Topic   string
	Payload []byte
	Text    *string `json:",omitempty"`
}

func runTail(e *env, fs *flag.FlagSet, args []string) error {
	topic := fs.Lookup("topic").Value.String()
	last := fs.Lookup("n").Value.(flag.Getter).Get().(int)
	follow := flagBool(fs, "f")
	a, err := openRead(args[0])
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.LookupRing(args[1])
	if err != nil {
		return err
	}
	topicSet := isSet(fs, "topic")
	show := func(rec shmarena.Record) {
		if topicSet && rec.Topic != topic {
			return
		}
		if e.json {
			tr := tailRecord{Seq: rec.Seq, Topic: rec.Topic, Payload: rec.Payload}
			if printable(rec.Payload) {
				s := string(rec.Payload)
				tr.Text = &s
			}
			_ = jsonLine(e, tr)
			return
		}
		t := rec.Topic
		if t == "" {
			t = "-"
		}
		fmt.Fprintf(e.stdout, "%d %s %s\n", rec.Seq, showBytes([]byte(t)), showBytes(rec.Payload))
	}
	// A cursor is this process's alone: reading joins no group and
	// changes nothing in the file.
	c := r.Cursor(shmarena.FromStart())
	var held []shmarena.Record
	for _, rec := range c.Read(0) {
		if !topicSet || rec.Topic == topic {
			held = append(held, rec)
		}
	}
	if last >= 0 && len(held) > last {
		held = held[len(held)-last:]
	}
	for _, rec := range held {
		show(rec)
	}
	if !follow {
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for {
		if err := c.Wait(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		for _, rec := range c.Read(0) {
			show(rec)
		}
	}
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func jsonLine(e *env, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = e.stdout.Write(append(b, '\n'))
	return err
}

func runDropGroup(e *env, fs *flag.FlagSet, args []string) error {
	a, err := openWrite(args[0])
	if err != nil {
		return err
	}
	defer a.Close()
	r, err := a.LookupRing(args[1])
	if err != nil {
		return err
	}
	var found *shmarena.GroupStats
	for _, g := range r.Groups() {
		if g.Name == args[2] {
			found = &g
		}
	}
	if found == nil {
		return r.DropGroup(args[2]) // names the error (ErrNoGroup)
	}
	if err := e.confirm(flagBool(fs, "yes"), fmt.Sprintf("drop group %q of ring %q in %s (lag %d, %d pending)?", args[2], args[1], args[0], found.Lag, found.Pending)); err != nil {
		return err
	}
	if err := r.DropGroup(args[2]); err != nil {
		return err
	}
	if e.json {
		return e.printJSON(struct{ Dropped string }{args[2]})
	}
	fmt.Fprintf(e.stdout, "dropped group %q of ring %q\n", args[2], args[1])
	return nil
}
