from sparktap.cli import main

main()
