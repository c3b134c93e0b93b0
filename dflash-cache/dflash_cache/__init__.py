"""dflash-cache: the pair rules (`dflash_cache.pairing`) and the cache Job's program (`dflash_cache.fetch`), with
`dflash_cache.result`, the contract between that Job's containers and the operator that reads them."""
