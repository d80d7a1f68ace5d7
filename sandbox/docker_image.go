package sandbox

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
)

// CheckImage returns an error if the launcher's image is not on the Docker
// host, so that a bridge that may not pull it (PullNever) can say so at
// start-up instead of failing every session.
func (d *Docker) CheckImage(ctx context.Context) error {
	img := d.opts.Image
	_, err := d.cli.ImageInspect(ctx, img)
	switch {
	case err == nil:
		return nil
	case cerrdefs.IsNotFound(err):
		return &OptionError{Field: "Pull", Err: fmt.Errorf(
			"image %s is not on the Docker host and the pull policy is never; build or load it there (docker build -t %s, docker load -i FILE), or let the bridge pull missing images", img, img)}
	default:
		return fmt.Errorf("looking up image %s on the Docker host: %w", img, err)
	}
}

// ImageDigest returns the digest of the launcher's image on the Docker
// host: its image ID ("sha256:..."), the digest of its configuration, which
// names its layers by digest in turn. Local builds have no registry digest;
// every image has this one.
func (d *Docker) ImageDigest(ctx context.Context) (string, error) {
	res, err := d.cli.ImageInspect(ctx, d.opts.Image)
	if err != nil {
		return "", fmt.Errorf("looking up image %s on the Docker host: %w", d.opts.Image, err)
	}
	return res.ID, nil
}

// pinnedImage returns what to create a session's container from: the
// pinned digest, once the image Image names has it; without a pin, Image.
func (d *Docker) pinnedImage(ctx context.Context, sessionID string) (string, error) {
	want := d.opts.ImageDigest
	if want == "" {
		return d.opts.Image, nil
	}
	got, err := d.ImageDigest(ctx)
	if err != nil {
		return "", fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, err)
	}
	if got != want {
		return "", fmt.Errorf("%w for session %s: %w", ErrLaunch, sessionID, &OptionError{Field: "ImageDigest", Err: fmt.Errorf(
			"image %s has digest %s, not the pinned %s; pin the new image again (bridge pin) if it is trusted, or bring back the pinned one", d.opts.Image, got, want)})
	}
	return want, nil
}
