// Command hitratio measures the evicting map's hit ratios: shmarena's evicting
// Map against an exact LRU and an S3-FIFO reference simulator on Zipf,
// one-hit-wonder and scan traces, and prints the tables of results.md's
// "Hit ratio" section to standard output (progress goes to
// standard error). About five minutes; -short takes a few seconds;
// -whatif simulates a policy change (15/16 of the slots live) on the
// map's model instead (no Map runs).
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
	whatif := flag.Bool("whatif", false, "instead, simulate a change to the map's policy (15/16 live) on its model")
	flag.Parse()
	specs, sizes := sim.FullSpecs(), sim.FullSizes()
	if *short {
		specs, sizes = sim.ShortSpecs(), sim.ShortSizes()
	}
	if *whatif {
		ws, err := sim.MeasureWhatIf(specs, sizes, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hitratio:", err)
			os.Exit(1)
		}
		fmt.Print(sim.WhatIfMarkdown(ws))
		return
	}
	rows, err := sim.Measure(specs, sizes, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hitratio:", err)
		os.Exit(1)
	}
	fmt.Print(sim.Markdown(rows))
}
