"""What the tests share: kits, fake providers, programs and flows a worker loads, processes to kill."""
