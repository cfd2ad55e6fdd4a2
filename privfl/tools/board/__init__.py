"""`privfl board`: a read-only web page over a site's run folders (docs/deploy.md)."""
