//go:build race

package tests

// tcpRaceEnabled skips the bulk TCP test under -race, where moving 1 GiB
// through two instrumented processes takes minutes.
const tcpRaceEnabled = true
