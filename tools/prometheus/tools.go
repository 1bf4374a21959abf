//go:build tools

// Package tools pins the Prometheus server this consumer module builds.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
