//go:build tools

// Package kubebuild is the wrapper module devcluster/build.sh compiles Kubernetes from: these imports keep
// every command's packages in go.mod and go.sum (scripts/pin-go-wrappers.sh writes both).
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
