package verify

// PortableHash returns cfg set to hash rows with md5 only: the path Compare
// takes when the two databases compute hashtextextended differently.
func PortableHash(cfg Config) Config {
	cfg.portableHash = true
	return cfg
}

// DestSettings returns cfg set to change settings in the destination's
// comparison transactions after the pinned ones.
func DestSettings(cfg Config, settings map[string]string) Config {
	cfg.destSettings = settings
	return cfg
}
