package main

import (
	"context"
	"fmt"
	"log"
	"syscall"
)

// peersResult is scenario 2: the same job done by a SKIP LOCKED queue and
// by session advisory locks, and how each design (baton included) behaves
// when a busy worker is SIGKILLed or SIGSTOPped.
type peersResult struct {
	Runs         []runResult   `json:"runs"`
	Concurrency  int           `json:"concurrency"`
	FaultWorkers int           `json:"fault_workers"`
	FaultDataset *dataset      `json:"fault_dataset"`
	FaultBatch   int           `json:"fault_batch_size"`
	FaultTiming  timing        `json:"fault_timing"`
	Faults       []faultResult `json:"faults"`
}

func (e *env) runPeers(ctx context.Context, res *results) error {
	ds, err := e.throughputDataset(ctx)
	if err != nil {
		return err
	}
	p := &peersResult{FaultBatch: e.cfg.faultBatch, FaultTiming: timingFast, Concurrency: e.cfg.peerConc, FaultWorkers: e.cfg.faultWorkers}
	res.Peers = p
	batonDigest := ""
	if res.Throughput != nil {
		for _, r := range res.Throughput.Runs {
			batonDigest = r.Digest
		}
	}
	for _, d := range []design{designSkipLocked, designAdvisory} {
		for _, n := range e.cfg.peerWorkers {
			r, err := e.runDesign(ctx, ds, d, n, 1, res)
			if err != nil {
				return fmt.Errorf("%s with %d workers: %w", d.Name, n, err)
			}
			if batonDigest != "" && r.Digest != batonDigest {
				return fmt.Errorf("%s with %d workers: output differs from baton's", d.Name, n)
			}
			p.Runs = append(p.Runs, r)
		}
	}

	fds, err := e.seedTemplate(ctx, "fault", e.cfg.faultContr, e.cfg.faultPerContr)
	if err != nil {
		return err
	}
	p.FaultDataset = fds
	designs := []design{designBaton, designSkipLocked, designAdvisory}
	if e.cfg.hardened {
		designs = append(designs, designSkipHard, designAdvHard)
	}
	for _, d := range designs {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
			r, err := e.faultExperiment(ctx, fds, d, sig)
			if err != nil {
				log.Printf("peers: %s %s: %v", d.Name, sigName(sig), err)
				return fmt.Errorf("%s %s experiment: %w", d.Name, sigName(sig), err)
			}
			res.addCommand(r.Command)
			p.Faults = append(p.Faults, r)
		}
	}
	return nil
}
