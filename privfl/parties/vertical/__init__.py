"""The vertical roles: Server, Host and Guest; PSI and prediction."""
