//go:build tools

// Package tools pins the Helm command this consumer module builds.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
