//go:build !race

package tests

const tcpRaceEnabled = false
