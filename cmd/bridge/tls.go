package main

import (
	"crypto/tls"
	"errors"
	"log/slog"

	"github.com/mcp-bridge/mcp-bridge/bridge"
)

// newTLSConfig is the listener's TLS of --tls-cert, --tls-key and
// --tls-client-ca (bridge.NewTLSConfig), nil without --tls-cert. reload
// loads the certificate again; serve runs it on SIGHUP (onSIGHUP, the
// bridge's one SIGHUP handler, which also reloads --config).
func newTLSConfig(cfg *config, logger *slog.Logger) (conf *tls.Config, reload func(), err error) {
	if cfg.TLSCert == "" {
		return nil, nil, nil
	}
	return bridge.NewTLSConfig(&bridge.TLSOptions{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, ClientCAFile: cfg.TLSClientCA, Logger: logger})
}

// checkTLS checks the TLS flags together.
func (c *config) checkTLS() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca needs --tls-cert and --tls-key")
	case c.TLSCert != "" && c.AffinityAddr != "":
		// Instances forward to each other over plain HTTP.
		return errors.New("--tls-cert with session affinity is not supported: terminate TLS at the load balancer")
	}
	return nil
}
