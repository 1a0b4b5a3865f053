from toolswap.cli import main

main()
