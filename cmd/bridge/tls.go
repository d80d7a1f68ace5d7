package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// TLS without a reverse proxy: --tls-cert and --tls-key, reloaded on
// SIGHUP (certificates from ACME clients are renewed every few weeks; a
// restart would end every session), and --tls-client-ca for mutual TLS.

// certReloader serves the certificate loaded last; a reload that fails
// keeps the previous one, so a half-written renewal never takes the
// endpoint down.
type certReloader struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) reload() error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("loading --tls-cert %s and --tls-key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert.Store(&c)
	return nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// newTLSConfig loads the certificate and, with --tls-client-ca, the CAs
// that client certificates must chain to. It returns nil without
// --tls-cert. reload loads the certificate again; serve runs it on SIGHUP
// (onSIGHUP, the bridge's one SIGHUP handler, which also reloads --config).
func newTLSConfig(cfg *config, logger *slog.Logger) (conf *tls.Config, reload func(), err error) {
	if cfg.TLSCert == "" {
		return nil, nil, nil
	}
	r, err := newCertReloader(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, nil, err
	}
	conf = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.getCertificate,
	}
	if cfg.TLSClientCA != "" {
		pem, err := os.ReadFile(cfg.TLSClientCA)
		if err != nil {
			return nil, nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--tls-client-ca %s holds no PEM certificate", cfg.TLSClientCA)
		}
		conf.ClientCAs = pool
		conf.ClientAuth = tls.RequireAndVerifyClientCert
	}

	return conf, func() {
		if err := r.reload(); err != nil {
			logger.Error("TLS certificate not reloaded: still serving the previous one; fix the files and send SIGHUP again", "err", err)
			return
		}
		c := r.cert.Load()
		attrs := []any{"cert", cfg.TLSCert}
		if c.Leaf != nil {
			attrs = append(attrs, "subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
		}
		logger.Info("TLS certificate reloaded", attrs...)
	}, nil
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
