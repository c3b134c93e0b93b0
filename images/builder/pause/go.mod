module dflash.dev/images/pause

go 1.26.0
