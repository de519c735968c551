"""What several commands share: binary arms, secret row splits, linear rules over a public feature
map."""
