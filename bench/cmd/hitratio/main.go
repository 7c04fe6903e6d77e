// Command hitratio measures issue 13's hit ratios: shmarena's evicting
// Map against an exact LRU and an S3-FIFO reference simulator on Zipf,
// one-hit-wonder and scan traces, and prints the tables of results.md's
// "Hit ratio (issue 13)" section to standard output (progress goes to
// standard error). About two minutes; -short takes a second or two.
//
//	go run ./cmd/hitratio > /tmp/hitratio.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shmarena/shmarena/bench/sim"
)

func main() {
	short := flag.Bool("short", false, "small traces (20,000 keys, 200,000 requests), as CI runs")
	flag.Parse()
	specs, sizes := sim.FullSpecs(), sim.FullSizes()
	if *short {
		specs, sizes = sim.ShortSpecs(), sim.ShortSizes()
	}
	rows, err := sim.Measure(specs, sizes, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hitratio:", err)
		os.Exit(1)
	}
	fmt.Print(sim.Markdown(rows))
}
